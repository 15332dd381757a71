"""Native runners: artifacts loaded and timed from C++ with no Python, and app skeletons.

``build`` compiles the shipped C++ sources (``cpp/``) against the LibTorch and ExecuTorch the
installed wheels carry, once, cached; ``runner`` is ``mobilize bench --native``; ``app`` writes
the ``mobilize optimize --emit-app DIR`` CMake projects; ``tensorfile`` is the tensor-list file
both sides read and write.
"""
