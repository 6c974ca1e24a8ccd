"""Development tools: the local stack, the demo, the pinned JVM jars and helm. Source checkout only.

Nothing here ships in the wheel or the images: `ureplicator stack` and `ureplicator demo`
import this package lazily and say so when it is missing.
"""
