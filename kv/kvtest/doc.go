// Package kvtest is the test kit of package kv, for oncekv's own tests and
// for a service's: it opens databases the way a test wants them, holds the
// conformance suite every kv backend must pass, and damages files on
// purpose, so that a test can prove what a user relies on against the real
// bbolt file (or the real etcd cluster), not a mock.
//
// # Opening
//
// Open gives a test a fresh database under t.TempDir (OpenPath one at a
// path of its choosing); when the test ends, Cleanup closes it and runs
// the consistency checks passed (kv.Checker, the packages' Checkers), so
// every test that writes also proves it left a consistent file. MustCheck
// runs them mid-test. NoSync and ManualClock make a test fast and its
// time its own. With ONCEKV_TEST_REMOTE set (EnvRemote), Open reaches a
// backend served by another process (Serve, RemoteBackend): the library's
// suites run against etcd that way. RequireBolt, RequireLocal,
// RequireSingleWriter and RequireGroupCommit skip, with the reason, a
// test that only means something on a backend with that property.
//
// # The conformance suite
//
// RunConformance is the contract of kv.Backend, run unchanged on bbolt
// (package kv) and on a real etcd cluster (package etcdkv): buckets,
// values and read-your-writes, cursor order both ways with Seek, deletion
// while iterating, sequences, rollback on error and panic, OnCommit only
// after a commit, snapshot reads, the port's write errors, and
// serializable write transactions under concurrency (no lost update, no
// phantom in a scanned range). RetriedViews and RetriedTxs wrap a backend
// so that each read or write function runs twice, as it does after an
// optimistic conflict: a caller that keeps state across runs shows it.
// CountingBackend keeps a count of its own over a bbolt file
// (kv.Counting), as etcd's backend does, for the tests of what shows such
// counts.
//
// # Runs twice, on purpose
//
// Built with -tags oncekv_rerun, every bbolt transaction runs its
// function twice (package internal/rerun), so a function with an effect
// outside its transaction is caught. Counts, RunsTwice and RequireOneRun
// let a test that counts such effects pass in that build; Counter,
// Counters and Increment keep counts inside the transaction instead.
//
// # Damage, cuts and leaks
//
// Damage, DamageLogEntry (with Naming to pick the entry of one scope and
// key), DropFreelist, CutShortMap, WriteFormat and RawUpdate change a
// file behind oncekv's back, as a disk or an older version would, for the
// tests that prove a damaged record is reported and never misread.
// PowercutProgram and MountPowerDisk run a service's files on the
// powercut filesystem, whose power a test cuts (PowerDisk.CutWhile): what
// was not synced is lost, as on a machine that lost power.
// CloseUnderLoad closes a database under concurrent calls. RunWithoutLeaks
// is a TestMain that fails the package on a leaked goroutine (goleak).
package kvtest
