// Command chart draws bench/throughput.svg from the JSON of
//
//	oncekv bench --clients-list 1,2,4,8,16,32,64,128 --keyed --bare-bolt-batch --json
//
// throughput and p99 latency against clients, one line per workload. It is
// a module of its own so the plotting library never reaches the library's
// dependency graph; `make chart` runs both steps.
package main
