from helpers.ir_fixtures import kernel_cache, launcher, rng  # noqa: F401
