#!/bin/sh
# minimal: one process publishes a version and receives it (README's example).
exec ./minimal "weft-example-minimal-$$"
