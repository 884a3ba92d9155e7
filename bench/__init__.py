"""The agui-gateway benchmark: `python -m bench [--size tiny|small|full]`.

Every headline figure is a ratio against a baseline measured in the same run
on the same broker and the same records (or an absolute figure with its
target: latency, bytes per thread). See bench/__main__.py for the command.
"""
