"""One trial on one worker: build, compile, fit to the deadline, report each epoch."""
