package providertest_test

import (
	"context"
	"fmt"

	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// The fake charges once per downstream key, and can be told to charge
// and then lose the answer: the failure a reconciler exists for. Asking
// its status by key tells what happened; calling again with the same key
// does not charge twice.
func Example() {
	ctx := context.Background()
	provider := providertest.New(providertest.Rates{}, 1)
	provider.Script = func(op string, c sideeffect.Call) providertest.Fault {
		if op == "do" && c.Attempt == 1 {
			return providertest.LoseResponse
		}
		return providertest.None
	}
	call := sideeffect.Call{Kind: "charge", Subject: "order/1042", DownstreamKey: "acme-pay-1042", Payload: []byte(`{"cents":2500}`), Attempt: 1}

	_, err := provider.Do(ctx, call)
	fmt.Println("first call:", err)
	st, _ := provider.Status(ctx, call)
	fmt.Println("status:", st.State, string(st.Result))
	call.Attempt = 2
	again, _ := provider.Do(ctx, call)
	fmt.Println("second call:", again.State, string(again.Result))

	fmt.Println("charges:", len(provider.Charges()), "calls:", provider.Ops(call.DownstreamKey))
	// Output:
	// first call: providertest: connection reset (the charge went through)
	// status: succeeded ch_0001
	// second call: succeeded ch_0001
	// charges: 1 calls: [do:lost status:succeeded do:replayed]
}
