"""Routing policies, one module each; importing this package fills the registry."""

from prefixserve.router.policies import (  # noqa: F401  (registration side effects)
    cache_aware,
    consistent_hash,
    kv_events,
    least_load,
    power_of_two,
    prefix_hash,
    random_choice,
    round_robin,
)
from prefixserve.router.policies.base import (
    NoWorkerAvailable,
    PolicyConfig,
    RoutingPolicy,
    Worker,
    policy_class,
    policy_names,
)

__all__ = ["NoWorkerAvailable", "PolicyConfig", "RoutingPolicy", "Worker", "policy_class",
           "policy_names", "make_policy"]


def make_policy(name: str, *, seed: int | None = None, **options) -> RoutingPolicy:
    """Build a policy by registry name; `options` are its config fields (unknown ones ignored)."""
    cls = policy_class(name)
    known = {f for f in cls.config_cls.__dataclass_fields__}
    config = cls.config_cls(**{k: v for k, v in options.items() if k in known and v is not None})
    extra = {"tokenizer": options["tokenizer"]} if options.get("tokenizer") is not None \
        and name == "kv_events" else {}
    return cls(config, seed=seed, **extra)
