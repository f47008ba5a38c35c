"""The invoke collection: image tasks and `docs` at the top level, `matrix` (`matrix.outdated`), `template.*`, `pool.*`
and `nodes.*` beside them.

The tasks live in trainstack/tasks/; each reports errors as `error: MESSAGE` with exit code 2, and so do
invoke's own command-line mistakes (trainstack/tasks/program.py).
Options that depend on the machine default to environment variables, so one machine's setup
(see ./dev) is written once: TRAINSTACK_BASE_IMAGE, TRAINSTACK_WHEELHOUSE, TRAINSTACK_CA_BUNDLE.
"""
from invoke import Collection

from trainstack.tasks import docs, images, matrix, nodes, pool, templates
from trainstack.tasks.program import report_parse_errors

report_parse_errors()
ns = Collection.from_module(images)
ns.add_task(docs.docs)
ns.add_collection(Collection.from_module(matrix), name="matrix")
ns.add_collection(Collection.from_module(templates), name="template")
ns.add_collection(Collection.from_module(pool), name="pool")
ns.add_collection(Collection.from_module(nodes), name="nodes")
