package main

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// scrape reads /metrics and parses it with Prometheus's own parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// counter sums the samples of family name whose labels include want.
func counter(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if match {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// The service serves oncekv's metrics at /metrics through the
// OpenTelemetry Prometheus exporter: after a create, its retry and a
// payment, the scraped counters say so.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	svc, _, _ := service(t)
	before := scrape(t, svc.url)
	require.Zero(t, counter(before, "oncekv_request_outcomes_total", map[string]string{"oncekv_call": "http"}))

	o := do(t, "POST", svc.url+"/v1/orders", acme, "m-1", orderBody("ext-m", 100, "t"))
	require.Equal(t, 201, o.Status)
	require.Equal(t, 201, do(t, "POST", svc.url+"/v1/orders", acme, "m-1", orderBody("ext-m", 100, "t")).Status)
	id := o.json(t)["id"].(string)
	require.Equal(t, 200, do(t, "POST", svc.url+"/v1/orders/"+id+"/pay", acme, "m-pay", "").Status)

	fams := scrape(t, svc.url)
	require.Equal(t, 2.0, counter(fams, "oncekv_request_outcomes_total", map[string]string{"oncekv_call": "http", "oncekv_outcome": "new"}), "the create and the payment")
	require.Equal(t, 1.0, counter(fams, "oncekv_request_outcomes_total", map[string]string{"oncekv_call": "http", "oncekv_outcome": "replay"}))
	require.Equal(t, 1.0, counter(fams, "oncekv_intent_transitions_total", map[string]string{"oncekv_intent_kind": "charge", "oncekv_intent_state": "succeeded"}))
	require.Equal(t, 1.0, counter(fams, "oncekv_provider_calls_total", map[string]string{"oncekv_provider_op": "do", "oncekv_outcome": "succeeded"}))
	// The ledger's own figures (oncekvotel.ObserveLedger): the retry was
	// answered from the cache of recent records, and the directory holds
	// the records written.
	require.GreaterOrEqual(t, counter(fams, "oncekv_ledger_cache_lookups_total", map[string]string{"oncekv_cache_result": "hit"}), 1.0)
	records := fams["oncekv_ledger_directory_records"]
	require.NotNil(t, records, "the directory's records are exported")
	require.GreaterOrEqual(t, records.GetMetric()[0].GetGauge().GetValue(), 2.0, "the create and the payment")
	h := fams["oncekv_commit_duration_seconds"]
	require.NotNil(t, h, "the commit histogram is exported in seconds")
	var commits uint64
	for _, m := range h.GetMetric() {
		commits += m.GetHistogram().GetSampleCount()
	}
	require.Positive(t, commits)
}
