"""Native runners: artifacts loaded and timed from C++ with no Python, and app skeletons.

Engine-free: each engine declares a ``NativeRunner`` (``Backend.native``) with its C++ sources in its own
folder (``backends/<engine>/cpp``); the headers they share are in ``cpp/``.  ``build`` compiles a runner's
benchmark against the runtime its installed wheel carries, once, cached; ``runner`` is
``mobilize bench --native``; ``app`` writes the ``mobilize optimize --emit-app DIR`` CMake projects;
``tensorfile`` is the tensor-list file both sides read and write.
"""
