"""Search: the hyperparameter space, the oracles, and the epoch schedule."""
