"""CUDA facts: whether a driver is present, how many devices, how much memory."""

from ._amso import cuda_device_count as device_count
from ._amso import cuda_is_available as is_available
from ._amso import cuda_memory_info as memory_info

__all__ = ["is_available", "device_count", "memory_info"]
