"""The regression suite: scenario files, cassettes, the runner and the pytest plugin."""
