"""The generated regions of the pages, one module per page; `results/generate.py` is the driver.

A page marks a region that a block writes:

    <!-- generated: NAME -->
    ...text written by the block NAME...
    <!-- /generated -->

Each block is a function of the page's module, registered with `common.block(NAME)`, that reads
the record (results/*.csv and the experiment scripts' outputs, benchmarks/results/) and returns
the region's text:

    readme.py        README.md: the quick start
    results_page.py  docs/results.md: the claim rows of E1, E2, E5, E7 and the quick start
    conventions.py   docs/results.md: the E1 / E2 data conventions (results/conventions.json)
    benchmarks.py    docs/benchmarks.md (benchmarks/results/)
    gpu.py           docs/gpu.md (benchmarks/results/gpu_*.json)
    e1.py, e1_variants.py, e2.py, e5.py, e5_gpu.py, e7.py   results/<the same name>.md
                     (e5.py: results/e5_full_scale.md)
    common.py        the registry, numbers as the pages print them, records read by several pages
"""
