"""DLPack device type codes (DLPack 1.3 ``DLDeviceType``)."""

from enum import IntEnum


class DLDeviceType(IntEnum):
    """Where a DLPack tensor's memory lives."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18


kDLCPU = DLDeviceType.kDLCPU
kDLCUDA = DLDeviceType.kDLCUDA

__all__ = ["DLDeviceType", "kDLCPU", "kDLCUDA"]
