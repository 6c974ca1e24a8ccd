"""Development tools: local stack, demo, pinned JVM jars, helm and promtool, image builds. Source checkout only.

Nothing here ships in the wheel or the images: `ureplicator stack` and `ureplicator demo`
import this package lazily and say so when it is missing.
"""
