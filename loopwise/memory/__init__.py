"""The memory engine: operators of a whole model as loop nests with affine accesses, their exact
tile footprints and cross-operator flow (the polyhedral model, islpy), and a planner for tiling,
fusion and scratchpad residency that minimizes DRAM traffic on a scratchpad accelerator."""
