"""stablehlo-costmodel: cost StableHLO programs on hardware you do not have.

The library (rules, backends, hardware, IR helpers) lives here; the MLIR passes are in
`costmodel.passes`; the command-line drivers are `costmodel.driver` (stablehlo-opt) and
`costmodel.cli` (costmodel).
"""

__version__ = "0.1.0"
