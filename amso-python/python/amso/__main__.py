"""``python -m amso --include`` prints the folder of amso.h and amso.cuh (``amso.get_include()``);
``python -m amso --includes`` the compiler flags for them and Python.h, as pybind11's:

    cc -shared -fPIC $(python3 -m amso --includes) my_extension.c -o my_extension.so
"""

from __future__ import annotations

import argparse
import sysconfig

import amso

parser = argparse.ArgumentParser(prog="python -m amso", description="Where amso's C and CUDA headers are.")
parser.add_argument("--include", action="store_true", help="the folder holding amso.h and amso.cuh")
parser.add_argument("--includes", action="store_true", help="-I flags for amso.h, amso.cuh and Python.h")
arguments = parser.parse_args()
if arguments.include:
    print(amso.get_include())
if arguments.includes:
    folders = dict.fromkeys([amso.get_include(), sysconfig.get_path("include"), sysconfig.get_path("platinclude")])
    print(" ".join(f"-I{folder}" for folder in folders))
if not (arguments.include or arguments.includes):
    parser.print_help()
