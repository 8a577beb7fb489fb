"""Where batch work runs (threads, or Ray actors on a cluster) and the pair measurement that runs on it."""
