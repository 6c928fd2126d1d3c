package fingerprint_test

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/oncekv/oncekv/fingerprint"
)

// A client that re-serialises its request (another member order, other
// whitespace, a fresh client timestamp) sends the same request; the same
// key on another order, or with another amount, is another request.
func Example() {
	f, err := fingerprint.New(&fingerprint.Options{Exclude: []string{"client_ts"}})
	if err != nil {
		panic(err)
	}
	header := http.Header{"Content-Type": {"application/json"}}
	sum := func(target, body string) string {
		fp, err := f.Sum(http.MethodPost, target, fingerprint.BodyType(header), []byte(body))
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%x", fp[:4])
	}
	first := sum("/v1/orders/A/pay", `{"amount": 2500, "currency": "EUR", "client_ts": 1}`)
	retry := sum("/v1/orders/A/pay", `{"currency":"EUR","amount":2500,"client_ts":2}`)
	otherOrder := sum("/v1/orders/B/pay", `{"amount": 2500, "currency": "EUR", "client_ts": 1}`)
	otherAmount := sum("/v1/orders/A/pay", `{"amount": 2600, "currency": "EUR", "client_ts": 1}`)

	fmt.Println("retry is the same request:", retry == first)
	fmt.Println("another order is another request:", otherOrder != first)
	fmt.Println("another amount is another request:", otherAmount != first)
	fmt.Println(sum("/v1/orders/A/pay", `{"amount": 2500, "amount": 2600}`))
	// Output:
	// retry is the same request: true
	// another order is another request: true
	// another amount is another request: true
	// fingerprint: invalid JSON body: fingerprint: JSON object repeats a member name: object members "amount" and "amount" are one field to a case-insensitive JSON decoder (Go's encoding/json); send each field once, in one spelling
}

// Canonical shows what is hashed: members sorted, whitespace dropped,
// excluded fields left out (arrays are transparent to the paths), numbers
// as written.
func ExampleFingerprinter_Canonical() {
	f, err := fingerprint.New(&fingerprint.Options{Exclude: []string{"meta.request_id", "items.note"}})
	if err != nil {
		panic(err)
	}
	canonical, err := f.Canonical([]byte(`{
		"meta": {"request_id": "r-81", "source": "app"},
		"items": [{"sku": "A-1", "qty": 2, "note": "gift"}, {"sku": "B-7", "qty": 1.0}],
		"amount": 2500
	}`))
	fmt.Println(string(canonical), err)
	// Output:
	// {"amount":2500,"items":[{"qty":2,"sku":"A-1"},{"qty":1.0,"sku":"B-7"}],"meta":{"source":"app"}} <nil>
}

// A JSON body that does not parse is refused, never hashed as bytes: the
// middleware answers it with a 400 before any transaction.
func ExampleFingerprinter_Sum_invalidJSON() {
	f, _ := fingerprint.New(nil)
	_, err := f.Sum(http.MethodPost, "/v1/orders", "application/json", []byte(`{"amount": 25`))
	fmt.Println(errors.Is(err, fingerprint.ErrInvalidJSON))
	// A gzip body is hashed as the bytes sent (BodyType gives "").
	header := http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}
	_, err = f.Sum(http.MethodPost, "/v1/orders", fingerprint.BodyType(header), []byte{0x1f, 0x8b, 0x08})
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}
