"""``loopwise kernels bench``: one search per problem of a benchmark selection, aggregated.

``run`` holds the bench run (its settings, the problem selection, the table's aggregation);
``console`` is the command's terminal side. The bench's HTML report is in ``kernels.report``.
"""
