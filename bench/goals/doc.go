// Command goals measures the hot path's goals (the "hot path" issue) in one
// go and prints them as a table, each beside its floor from the same run:
// what raw bbolt charges for the least the same durable record needs, the
// ratio no code can go under.
//
//	go run ./bench/goals            # about 3 minutes; make goals
//	go run ./bench/goals -runs 3    # the throughput and benchmark steps three times
//	go run ./bench/goals -quick     # a smoke run of seconds: figures not to quote
//
// It runs, from the repository's root and one after the other:
//
//   - oncekv bench --clients-list 1,16,64 --preload 200000 --duration 8s
//     --rounds 4 --floor --json (the throughput ratios, and the floor's);
//   - go test ./bench -bench '^Benchmark(Floor)?SingleTx$|^BenchmarkReplayHit$|^BenchmarkFloorReplay$'
//     -benchtime 20000x -count 2;
//   - go test ./bench -bench '^Benchmark(Floor)?Middleware/durable=true/clients=(1|16)$'
//     -benchtime 4000x -count 2;
//   - ONCEKV_BENCH_BIG=1 go test ./bench -bench '^BenchmarkOpen/records=1000000/' -benchtime 5x;
//   - go test ./internal/recstore -bench '^BenchmarkDirectoryHeap$' -benchtime 1x.
//
// Run it on a quiet machine: nothing else running, no CI, no fuzzing. A
// ratio moves by several hundredths from run to run (bench/README.md says
// how much), so a verdict near its goal is worth a second run.
package main
