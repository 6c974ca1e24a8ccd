"""Verification reports: the model, the store on disk, the HTML page and the Prometheus view.

The verifier writes reports and the controller serves them; both import this package,
which imports neither.
"""
