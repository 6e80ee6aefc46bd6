"""The Kubernetes vocabulary: names, field paths, objects as plain dicts, the AdmissionReview
envelope. No decisions and no I/O; imports nothing of webhook above it."""
