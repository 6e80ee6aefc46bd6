import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "hardening",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "hardening-long",
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("AUTOWRAP_HYPOTHESIS_PROFILE", "hardening"))
