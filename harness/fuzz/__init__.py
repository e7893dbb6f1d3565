"""``mla-verify fuzz``: cases drawn beyond the suites, a failure shrunk to a minimal case, a corpus of them.

``space`` is what is drawn from (the suites' values), ``draw`` draws a case, ``shrink`` and ``candidates``
make a failing case smaller while it fails the same way, ``corpus`` keeps the shrunk cases as suite files,
``profiles`` picks each round's engine profile, ``campaign`` runs it all through ``runner.run_cases``, and
``progress`` says how far it is.  ``ray_campaign`` runs the campaign's rounds on a Ray cluster's actors
(``ray_cluster``, ``ray_actor``: ``fuzz --ray``).  docs/fuzz.md.
"""
