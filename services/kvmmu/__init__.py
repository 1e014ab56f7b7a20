"""kvmmu: the map from sessions and content blocks to KV spans on engine workers; eviction orchestration."""
