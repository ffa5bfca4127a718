#!/bin/sh
# A producer and two engine-shaped consumers in three processes: three
# versions, every byte checked by each consumer; all three must exit 0.
name="weft-example-$$"
./producer "$name" 2 3 & producer=$!
./consumer "$name" engine-0 3 & first=$!
./consumer "$name" engine-1 3; second=$?
wait $first; first=$?
wait $producer; producer=$?
echo "producer $producer, engine-0 $first, engine-1 $second"
[ $producer -eq 0 ] && [ $first -eq 0 ] && [ $second -eq 0 ]
