// Command payments is an example service built on oncekv: orders created
// under an Idempotency-Key and paid through a provider, charged at most once
// per order whatever the retries, crashes and lost responses.
//
//	go run ./examples/payments
//	curl -s -X POST 127.0.0.1:8080/v1/orders -H 'Authorization: Bearer sk_test_acme' \
//	  -H 'Idempotency-Key: order-ext-1' -H 'Content-Type: application/json' \
//	  -d '{"external_ref":"ext-1","amount_cents":2500,"currency":"eur"}'
//
// Several replicas behind a load balancer share one ledger in etcd, and
// one provider. Run etcd with auto-compaction on (every write is a new
// revision; without it etcd grows until its space quota stops writes):
//
//	etcd --auto-compaction-mode=periodic --auto-compaction-retention=1h &
//	go run ./examples/payments/provider -addr 127.0.0.1:9090 &
//	go run ./examples/payments -etcd http://127.0.0.1:2379 -provider http://127.0.0.1:9090 -addr 127.0.0.1:8081 &
//	go run ./examples/payments -etcd http://127.0.0.1:2379 -provider http://127.0.0.1:9090 -addr 127.0.0.1:8082 &
//
// (oncekv demo --replicas 3 runs that whole arrangement, etcd included,
// in one process.)
package main
