package daemontest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricSeries parses an exposition into its series, by
// name{label="value",...} (labels sorted), the value of each: a
// histogram's _bucket, _sum and _count as the text has them.
func MetricSeries(t testing.TB, text string) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%.2000s", err, text)
	}
	out := map[string]float64{}
	key := func(name string, lps []*dto.LabelPair, extra ...string) string {
		var ls []string
		for _, lp := range lps {
			ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
		}
		ls = append(ls, extra...)
		sort.Strings(ls)
		if len(ls) == 0 {
			return name
		}
		return name + "{" + strings.Join(ls, ",") + "}"
	}
	for name, f := range fams {
		for _, mt := range f.GetMetric() {
			switch {
			case mt.Counter != nil:
				out[key(name, mt.Label)] = mt.Counter.GetValue()
			case mt.Gauge != nil:
				out[key(name, mt.Label)] = mt.Gauge.GetValue()
			case mt.Untyped != nil:
				out[key(name, mt.Label)] = mt.Untyped.GetValue()
			case mt.Histogram != nil:
				h := mt.Histogram
				out[key(name+"_count", mt.Label)] = float64(h.GetSampleCount())
				out[key(name+"_sum", mt.Label)] = h.GetSampleSum()
				for _, b := range h.Bucket {
					out[key(name+"_bucket", mt.Label, fmt.Sprintf("le=%q", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))] = float64(b.GetCumulativeCount())
				}
			case mt.Summary != nil:
				out[key(name+"_count", mt.Label)] = float64(mt.Summary.GetSampleCount())
			}
		}
	}
	return out
}
