"""Bounds on a selector, each with where Kubernetes sets it.

A tenant writes the expression, so each bound is what keeps one expression from
stalling a scheduling cycle or ending the process.
"""

from __future__ import annotations

# k8s.io/api/resource/v1 types.go CELSelectorExpressionMaxLength: the API server
# refuses longer expressions; refused here too, before anything is parsed.
MAX_EXPRESSION_LENGTH = 10 * 1024

# k8s.io/api/resource/v1 types.go CELSelectorExpressionMaxCost: kube-scheduler's
# runtime cost limit of one evaluation (cel.CostLimit in dynamic-resource-allocation
# cel/compile.go), in cel-go's cost units.
MAX_EVALUATION_COST = 1_000_000

# Nesting of parentheses, brackets, braces, calls and runs of unary operators, and
# the depth of the resulting syntax tree. cel-go refuses deep input too (its parser's
# recursion limit, which is higher: an expression nested between 50 and cel-go's
# limit is refused here and accepted by kube-scheduler, an accepted difference).
# These bounds are far beyond any selector written by hand and keep the parser
# (about 8 Python frames per nesting level), the checker and the evaluator (1-2
# frames per tree level) far from Python's recursion limit of 1,000.
MAX_NESTING = 50
MAX_AST_DEPTH = 100

# Bounds of the compiled-expression cache (kube-scheduler keeps an LRU of compiled
# expressions too: dynamic-resource-allocation/cel/cache.go).
COMPILE_CACHE_ENTRIES = 4096
