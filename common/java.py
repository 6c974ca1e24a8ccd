"""Find the java binary a JVM process runs with: $JAVA_HOME/bin/java, else java on PATH."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ureplicator.common.errors import UReplicatorError


class JavaNotFound(UReplicatorError):
    """No usable Java runtime."""


def java_executable() -> str:
    """The java binary to run: $JAVA_HOME/bin/java when JAVA_HOME is set, else java on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        # An explicit JAVA_HOME that is wrong is a configuration error worth reporting,
        # silently falling back to another java would hide it.
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            raise JavaNotFound(
                f"JAVA_HOME={java_home} has no executable bin/java; "
                "point JAVA_HOME at a Java 17+ installation or unset it to use java from PATH"
            )
        return str(candidate)
    found = shutil.which("java")
    if not found:
        raise JavaNotFound(
            "Java not found: no JAVA_HOME and no `java` on PATH. Install a Java 17+ runtime "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
        )
    return found
