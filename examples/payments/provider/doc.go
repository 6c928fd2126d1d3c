// Command provider is the payments example's fake payment provider, as its
// own program: it charges once per Idempotency-Key, keeps charges in its own
// bbolt file, and can be told to fail before charging (-fail-rate) or to
// charge and then drop the connection without answering (-lose-rate).
//
//	go run ./examples/payments/provider -addr 127.0.0.1:9090 -db provider.db
//	curl -s 127.0.0.1:9090/v1/charges
package main
