"""E5's protocol on a device moved to results/e5_protocol.py (an experiment: it writes the
results pages' records); this path stays because tests/engine/test_device.py runs it here.

    python benchmarks/e5_protocol.py ARGS  ==  python results/e5_protocol.py ARGS
"""
import sys

from results.e5_protocol import main

if __name__ == "__main__":
    sys.exit(main())
