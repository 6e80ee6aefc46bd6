"""autowrap: wraps Volcano Jobs and Pods into Kueue-queued AppWrappers at admission time."""

__version__ = "0.5.0"
