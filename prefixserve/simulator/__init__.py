"""Cluster simulator: the router's real policies over simulated workers with real KV caches.

No model, no HTTP, no torch: each worker is a `KVCacheManager` plus a cost model for time,
on one event clock. `prefixserve simulate` is the command line.
"""

from prefixserve.simulator.cluster_simulator import ClusterSimulator, SimConfig, simulate
from prefixserve.simulator.cost_model import CostModel
from prefixserve.simulator.word_tokenizer import WordTokenizer

__all__ = ["ClusterSimulator", "CostModel", "SimConfig", "WordTokenizer", "simulate"]
