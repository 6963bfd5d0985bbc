from ir._fixtures import kernel_cache, launcher, rng  # noqa: F401
