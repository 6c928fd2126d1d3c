// Package goid tells the running goroutine's number, from the first line
// of its stack ("goroutine 7 [running]:"). Go gives goroutines no identity
// on purpose; this is for checks that are off by default and for test
// builds (kv.Options.CheckNesting, the rerun build), never for the paths a
// service runs on. It costs a few microseconds.
package goid
