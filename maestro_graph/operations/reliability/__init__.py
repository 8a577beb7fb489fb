"""`maestro reliability`: the fault suite, the bad-input suite and the trust-boundary suite."""
