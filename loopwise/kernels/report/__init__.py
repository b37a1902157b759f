"""What the kernel engine shows people: terminal tables and one HTML report per kind of run.

``terminal`` prints the commands' tables; ``optimize_html``, ``eval_html`` and ``bench_html``
render the reports of ``kernels optimize``, ``kernels eval`` and ``kernels bench`` runs.
"""
