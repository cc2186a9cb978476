package harness

import "testing"

func TestParseSamples(t *testing.T) {
	samples, err := ParseSamples(`# HELP x a metric
# TYPE x counter
x 3
y{a="1",b="with \"quotes\", a comma and a \\"} 4.5 1700000000000
z_bucket{le="+Inf",subresource=""} 7

`)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 3 {
		t.Fatalf("%d samples: %v", len(samples), samples)
	}
	if s := samples[0]; s.Name != "x" || s.Value != 3 || len(s.Labels) != 0 {
		t.Errorf("x: %+v", s)
	}
	if s := samples[1]; s.Name != "y" || s.Value != 4.5 || s.Labels["b"] != `with "quotes", a comma and a \` || !s.Has(map[string]string{"a": "1"}) || s.Has(map[string]string{"a": "2"}) {
		t.Errorf("y: %+v", s)
	}
	if s := samples[2]; s.Labels["le"] != "+Inf" || !s.Has(map[string]string{"subresource": ""}) {
		t.Errorf("z: %+v", s)
	}
	for _, bad := range []string{"x", `x{a="1} 2`, "x{a} 2", "x two"} {
		if _, err := ParseSamples(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
