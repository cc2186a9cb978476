package harness

import (
	"fmt"
	"strconv"
	"strings"
)

// Sample is one sample of the Prometheus text exposition format (what a
// /metrics endpoint serves): a metric name, its labels, its value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Has reports whether the sample carries every pair of labels (a label
// absent reads as empty, as Prometheus reads it).
func (s Sample) Has(labels map[string]string) bool {
	for k, v := range labels {
		if s.Labels[k] != v {
			return false
		}
	}
	return true
}

// ParseSamples reads every sample of a /metrics text; comments and blank
// lines are skipped, a line that is neither nor a sample is an error.
func ParseSamples(text string) ([]Sample, error) {
	var samples []Sample
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", line, err)
		}
		samples = append(samples, s)
	}
	return samples, nil
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name = line[:i]
	rest := line[i:]
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for !strings.HasPrefix(rest, "}") {
			name, after, ok := strings.Cut(rest, `="`)
			if !ok {
				return s, fmt.Errorf("a label without a quoted value")
			}
			var value strings.Builder
			i := 0
			for ; i < len(after) && after[i] != '"'; i++ {
				if after[i] == '\\' && i+1 < len(after) {
					i++
					switch after[i] {
					case 'n':
						value.WriteByte('\n')
					default:
						value.WriteByte(after[i])
					}
					continue
				}
				value.WriteByte(after[i])
			}
			if i == len(after) {
				return s, fmt.Errorf("an unterminated label value")
			}
			s.Labels[strings.TrimSpace(name)] = value.String()
			rest = strings.TrimPrefix(after[i+1:], ",")
		}
		rest = rest[1:]
	}
	// The value, then perhaps a timestamp.
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}
