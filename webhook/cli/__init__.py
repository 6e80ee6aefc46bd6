"""The command line: ``autowrap`` (main.py) and the views it prints."""
