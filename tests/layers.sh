#!/bin/sh
# The layer order of ARCHITECTURE.md, checked over every #include "..." of
# the library, the tools and the tests: an include may point to its own
# component or to one below it, never up or sideways (one backend into
# another), and the includes form no cycle between files. Fails naming
# each arrow that breaks the order and each cycle.
set -u
: "${top_srcdir:=..}"
cd "$top_srcdir" || exit 1

# component: the components its files may include, besides itself. The
# first prefix that matches a path names its component.
rules='
include/weft:
common: include/weft
kernels: include/weft common
registry: include/weft common kernels
optim: include/weft common kernels registry
transport/core: include/weft common kernels registry
transport/ctl: include/weft common kernels registry transport/core
transport/plan: include/weft common kernels registry transport/core transport/ctl
transport/server: include/weft common kernels registry transport/core transport/ctl transport/plan
transport/remote: include/weft common kernels registry transport/core transport/ctl transport/plan
transport/topo: include/weft common kernels registry transport/core
transport/host: include/weft common kernels registry transport/core transport/ctl transport/plan transport/server transport/remote transport/topo
transport/cuda_ipc: include/weft common kernels registry transport/core transport/ctl transport/plan transport/server transport/remote transport/topo
transport/ucx: include/weft common kernels registry transport/core transport/ctl transport/plan transport/server transport/remote transport/topo
transport/nccl: include/weft common kernels registry transport/core transport/ctl transport/plan transport/server transport/remote transport/topo
examples: include/weft
perf: *
tests: *
'

files=$(find include common kernels registry optim transport perf tests examples \
    -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort)
[ -n "$files" ] || { echo "no sources found under $(pwd)"; exit 1; }

# One line per include: "from to", the target resolved the way the build's
# -I flags do: <weft/x.h> in include/, "dir/x.h" from the top of the tree,
# "x.h" beside the file. config.h (the build's) and system headers are not
# components.
for f in $files; do
    dir=${f%/*}
    sed -n -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/q \1/p' \
        -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*<\(weft\/[^>]*\)>.*/a \1/p' "$f" |
        while read -r kind target; do
            if [ "$kind" = a ]; then
                echo "$f include/$target"
            elif [ -f "$dir/$target" ]; then
                echo "$f $dir/$target"
            elif [ -f "$target" ]; then
                echo "$f $target"
            fi
        done
done | awk -v rules="$rules" '
function component(path,   i, best) {
    best = ""
    for (i = 1; i <= ncomp; i++) {
        if (index(path, comp[i] "/") == 1 && length(comp[i]) > length(best)) {
            best = comp[i]
        }
    }
    return best
}
BEGIN {
    n = split(rules, line, "\n")
    for (i = 1; i <= n; i++) {
        if (line[i] !~ /:/) continue
        name = line[i]; sub(/:.*/, "", name)
        deps = line[i]; sub(/^[^:]*:[ ]*/, "", deps)
        comp[++ncomp] = name
        allowed[name] = " " deps " "
    }
}
{
    from = $1; to = $2
    # a/b/../c.h -> a/c.h
    while (sub(/[^\/]+\/\.\.\//, "", to)) {}
    cf = component(from); ct = component(to)
    edges[from] = edges[from] " " to
    nodes[from] = 1; nodes[to] = 1
    if (cf == "" || ct == "" || cf == ct || allowed[cf] == " * ") next
    if (index(allowed[cf], " " ct " ") == 0) {
        printf "FAIL: %s includes %s: %s may not point to %s\n", from, to, cf, ct
        bad = 1
    }
}
# Depth-first search for a cycle among the files; the path on the stack
# names it.
function visit(node,   list, k, m, next_node, i, text) {
    state[node] = 1
    stack[++depth] = node
    m = split(edges[node], list, " ")
    for (k = 1; k <= m; k++) {
        next_node = list[k]
        if (state[next_node] == 1) {
            text = next_node
            for (i = depth; i >= 1 && stack[i] != next_node; i--) text = stack[i] " -> " text
            printf "FAIL: include cycle: %s -> %s\n", next_node, text
            bad = 1
        } else if (state[next_node] == 0) {
            visit(next_node)
        }
    }
    depth--
    state[node] = 2
}
END {
    for (node in nodes) if (state[node] == 0) visit(node)
    if (!bad) print "ok: every include points down the layers; no include cycle"
    exit bad
}'
