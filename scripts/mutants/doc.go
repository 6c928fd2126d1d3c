// Command mutants is mutation testing narrowed to what a change touched:
// it mutates the lines of one file, one mutant at a time (a comparison
// flipped or loosened, && and || swapped, ++ made --, an if's condition
// negated, a continue or break dropped), runs the tests named on its
// command line in the file's package (or in those -pkgs names: the etcd
// tests of a ledger file), and lists the mutants that no test killed.
// The tests must pass before any mutation, or it stops: a run that fails
// for another reason would count every mutant killed. The file is
// restored after each mutant and on interrupt.
//
// gremlins (scripts/mutate.sh) runs a package's whole test suite for
// each mutant and cannot be told which tests to run; on packages whose
// suite takes minutes (etcdkv: a cluster per test) this runs the tests
// that cover the code under change, for seconds a mutant:
//
//	go run ./scripts/mutants -file etcdkv/guess.go -- -run 'Guess|Memo'
//	go run ./scripts/mutants -file etcdkv/tx.go -lines 380-460 -- -short
//	go run ./scripts/mutants -file ledger/quota.go -pkgs ./ledger,./etcdkv -- -run Quota
//
// A survivor is a test gap or an equivalent mutant (one that changes
// nothing a caller can tell, such as a bound's off-by-one that no input
// reaches): read it before writing a test. Run a survivor again against
// the package's whole suite before calling it a gap; the narrowed tests
// are the first sieve, not the last.
package main
