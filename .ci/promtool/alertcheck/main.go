// alertcheck makes the checks of .ci/alerts that promtool does not, with
// Prometheus' own rule and PromQL parsers:
//
//	alertcheck extract RENDERED RULES
//	    writes the spec (the rule groups) of the one PrometheusRule in a
//	    `helm template` render to RULES, a Prometheus rules file;
//	alertcheck check -metrics LIST -rules RULES -dashboard JSON -anchors OUT TEST...
//	    every alert has a severity, a summary, a description and a runbook
//	    in docs/operations.md (the anchors are written to OUT, one a line,
//	    for the docs' link check); every alert has a unit test that expects
//	    it to fire and one that expects it not to (TEST: promtool test
//	    files); the dashboard is valid JSON whose every panel has the
//	    ${datasource} data source and at least one query, each selector
//	    filtered by $namespace and $job; and every metric name a rule or a
//	    panel reads is one of LIST (one name a line, # comments), the names
//	    ownerguard exports.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

const datasource = "${datasource}"

var promql = parser.NewParser(parser.Options{})

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: alertcheck extract RENDERED RULES | alertcheck check -metrics LIST -rules RULES -dashboard JSON -anchors OUT TEST..."))
	}
	var err error
	switch os.Args[1] {
	case "extract":
		if len(os.Args) != 4 {
			fail(errors.New("usage: alertcheck extract RENDERED RULES"))
		}
		err = extract(os.Args[2], os.Args[3])
	case "check":
		err = check(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "alertcheck:", err)
	os.Exit(1)
}

// extract writes the spec of the render's only PrometheusRule to out.
func extract(rendered, out string) error {
	text, err := os.ReadFile(rendered)
	if err != nil {
		return err
	}
	decoder := yaml.NewDecoder(bytes.NewReader(text))
	var spec *yaml.Node
	for {
		var doc struct {
			APIVersion string    `yaml:"apiVersion"`
			Kind       string    `yaml:"kind"`
			Spec       yaml.Node `yaml:"spec"`
		}
		err := decoder.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rendered, err)
		}
		if doc.Kind != "PrometheusRule" {
			continue
		}
		if doc.APIVersion != "monitoring.coreos.com/v1" {
			return fmt.Errorf("%s: PrometheusRule of apiVersion %q, not monitoring.coreos.com/v1", rendered, doc.APIVersion)
		}
		if spec != nil {
			return fmt.Errorf("%s: more than one PrometheusRule", rendered)
		}
		spec = &doc.Spec
	}
	if spec == nil {
		return fmt.Errorf("%s: no PrometheusRule", rendered)
	}
	var buf bytes.Buffer
	encoder := yaml.NewEncoder(&buf)
	encoder.SetIndent(2)
	if err := encoder.Encode(spec); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

type problems []string

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

func check(args []string) error {
	flags := flag.NewFlagSet("check", flag.ContinueOnError)
	metricsFile := flags.String("metrics", "", "the metric names ownerguard exports")
	rulesFile := flags.String("rules", "", "the rules file")
	dashboardFile := flags.String("dashboard", "", "the dashboard JSON")
	anchorsFile := flags.String("anchors", "", "where to write the runbook anchors")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *metricsFile == "" || *rulesFile == "" || *dashboardFile == "" || *anchorsFile == "" || flags.NArg() == 0 {
		return errors.New("check needs -metrics, -rules, -dashboard, -anchors and test files")
	}
	var bad problems
	exported, err := readList(*metricsFile, &bad)
	if err != nil {
		return err
	}
	used := map[string][]string{} // metric name -> where
	alerts, anchors, err := checkRules(*rulesFile, used, &bad)
	if err != nil {
		return err
	}
	if err := checkTests(flags.Args(), alerts, &bad); err != nil {
		return err
	}
	panels, err := checkDashboard(*dashboardFile, used, &bad)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(used))
	for name := range used {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !exported[name] {
			bad.add("%s (read by %s) is not in %s: not a metric ownerguard exports", name, strings.Join(used[name], ", "), *metricsFile)
		}
	}
	var unread []string
	for name := range exported {
		if _, ok := used[name]; !ok {
			unread = append(unread, name)
		}
	}
	sort.Strings(unread)
	if err := os.WriteFile(*anchorsFile, []byte(strings.Join(anchors, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if len(bad) > 0 {
		for _, p := range bad {
			fmt.Println(p)
		}
		return fmt.Errorf("%d problems", len(bad))
	}
	fmt.Printf("%d alerts, each with a severity, a summary, a description, a runbook and tests that expect it to fire and not to\n", len(alerts))
	fmt.Printf("%d dashboard panels, each with the %s data source and queries filtered by $namespace and $job\n", panels, datasource)
	fmt.Printf("%d metric names read, all in %s\n", len(names), *metricsFile)
	if len(unread) > 0 {
		fmt.Printf("exported but read by no rule or panel: %s\n", strings.Join(unread, ", "))
	}
	return nil
}

func readList(path string, bad *problems) (map[string]bool, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for i, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !model.IsValidLegacyMetricName(line) {
			bad.add("%s:%d: %q is no metric name", path, i+1, line)
		}
		names[line] = true
	}
	return names, nil
}

var runbook = regexp.MustCompile(`^docs/operations\.md#([a-z0-9-]+)$`)

// checkRules reads the rules file as Prometheus does and returns the
// alerts' names and their runbook anchors.
func checkRules(path string, used map[string][]string, bad *problems) (map[string]bool, []string, error) {
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	alerts := map[string]bool{}
	seen := map[string]bool{}
	var anchors []string
	for _, group := range groups.Groups {
		for _, rule := range group.Rules {
			if rule.Alert == "" {
				bad.add("%s: group %s: a recording rule (%s): the chart ships alerts only", path, group.Name, rule.Record)
				continue
			}
			alerts[rule.Alert] = true
			switch rule.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				bad.add("%s: alert %s: severity %q, not critical, warning or info", path, rule.Alert, rule.Labels["severity"])
			}
			for _, key := range []string{"summary", "description"} {
				if strings.TrimSpace(rule.Annotations[key]) == "" {
					bad.add("%s: alert %s: no %s annotation", path, rule.Alert, key)
				}
			}
			m := runbook.FindStringSubmatch(rule.Annotations["runbook"])
			if m == nil {
				bad.add("%s: alert %s: runbook %q is not docs/operations.md#<anchor>", path, rule.Alert, rule.Annotations["runbook"])
			} else if !seen[m[1]] {
				seen[m[1]] = true
				anchors = append(anchors, m[1])
			}
			if url := rule.Annotations["runbook_url"]; url != "" && !strings.HasSuffix(url, "#"+strings.TrimPrefix(rule.Annotations["runbook"], "docs/operations.md#")) {
				bad.add("%s: alert %s: runbook_url %q does not end in the runbook's anchor", path, rule.Alert, url)
			}
			expr, err := promql.ParseExpr(rule.Expr)
			if err != nil {
				bad.add("%s: alert %s: %v", path, rule.Alert, err)
				continue
			}
			for _, name := range metricNames(expr, nil) {
				used[name] = appendOnce(used[name], "alert "+rule.Alert)
			}
		}
	}
	if len(alerts) == 0 {
		bad.add("%s: no alert", path)
	}
	return alerts, anchors, nil
}

// checkTests: every alert is tested firing and not firing.
func checkTests(files []string, alerts map[string]bool, bad *problems) error {
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		var unit struct {
			Tests []struct {
				AlertRuleTests []struct {
					Alertname string `yaml:"alertname"`
					ExpAlerts []any  `yaml:"exp_alerts"`
				} `yaml:"alert_rule_test"`
			} `yaml:"tests"`
		}
		if err := yaml.Unmarshal(text, &unit); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		for _, test := range unit.Tests {
			for _, a := range test.AlertRuleTests {
				if !alerts[a.Alertname] {
					bad.add("%s: a test of %q, which no rule defines", file, a.Alertname)
				}
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	names := make([]string, 0, len(alerts))
	for alert := range alerts {
		names = append(names, alert)
	}
	sort.Strings(names)
	for _, alert := range names {
		if !firing[alert] {
			bad.add("alert %s: no unit test expects it to fire", alert)
		}
		if !quiet[alert] {
			bad.add("alert %s: no unit test expects it not to fire", alert)
		}
	}
	return nil
}

// Grafana's interval variables, which PromQL cannot parse: any duration.
var grafanaInterval = regexp.MustCompile(`\$__(rate_interval|interval|range)\b`)
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource json.RawMessage `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    *struct{}       `json:"gridPos"`
	Targets    []struct {
		Expr       string          `json:"expr"`
		RefID      string          `json:"refId"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// isDatasource: the ${datasource} variable, as a uid or an object.
func isDatasource(raw json.RawMessage) bool {
	var uid string
	if json.Unmarshal(raw, &uid) == nil {
		return uid == datasource
	}
	var ref struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	return json.Unmarshal(raw, &ref) == nil && ref.UID == datasource && (ref.Type == "" || ref.Type == "prometheus")
}

func checkDashboard(path string, used map[string][]string, bad *problems) (int, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var d dashboard
	if err := json.Unmarshal(text, &d); err != nil {
		return 0, fmt.Errorf("%s: not valid JSON: %w", path, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
		bad.add("%s: uid, title and schemaVersion are required", path)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "datasource" {
			var query string
			if json.Unmarshal(v.Query, &query) != nil || query != "prometheus" {
				bad.add("%s: variable %s: a data source variable of type prometheus", path, v.Name)
			}
			continue
		}
		if v.Type != "query" {
			continue
		}
		if !isDatasource(v.Datasource) {
			bad.add("%s: variable %s: data source is not %s", path, v.Name, datasource)
		}
		var query string
		if json.Unmarshal(v.Query, &query) != nil {
			var q struct {
				Query string `json:"query"`
			}
			if json.Unmarshal(v.Query, &q) != nil {
				bad.add("%s: variable %s: no query", path, v.Name)
				continue
			}
			query = q.Query
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(query))
		if m == nil {
			bad.add("%s: variable %s: query %q is not label_values(<selector>, <label>)", path, v.Name, query)
			continue
		}
		expr, err := promql.ParseExpr(m[1])
		if err != nil {
			bad.add("%s: variable %s: %v", path, v.Name, err)
			continue
		}
		for _, name := range metricNames(expr, nil) {
			used[name] = appendOnce(used[name], "dashboard variable "+v.Name)
		}
	}
	for _, want := range [][2]string{{"datasource", "datasource"}, {"namespace", "query"}, {"job", "query"}} {
		if vars[want[0]] != want[1] {
			bad.add("%s: no %s variable %s", path, want[1], want[0])
		}
	}
	ids := map[int]bool{}
	count := 0
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			where := fmt.Sprintf("%s: panel %d %q", path, p.ID, p.Title)
			if p.ID == 0 || ids[p.ID] {
				bad.add("%s: no id, or one another panel has", where)
			}
			ids[p.ID] = true
			if p.GridPos == nil {
				bad.add("%s: no gridPos", where)
			}
			if p.Type == "row" {
				if len(p.Targets) > 0 {
					bad.add("%s: a row with queries", where)
				}
				walk(p.Panels)
				continue
			}
			count++
			if p.Title == "" {
				bad.add("%s: no title", where)
			}
			if !isDatasource(p.Datasource) {
				bad.add("%s: data source is not %s", where, datasource)
			}
			if len(p.Targets) == 0 {
				bad.add("%s: no query", where)
			}
			refs := map[string]bool{}
			for _, t := range p.Targets {
				if t.Datasource != nil && !isDatasource(t.Datasource) {
					bad.add("%s: query %s: data source is not %s", where, t.RefID, datasource)
				}
				if t.RefID == "" || refs[t.RefID] {
					bad.add("%s: a query without a refId, or with another's", where)
				}
				refs[t.RefID] = true
				expr, err := promql.ParseExpr(grafanaInterval.ReplaceAllString(t.Expr, "5m"))
				if err != nil {
					bad.add("%s: query %s: %v", where, t.RefID, err)
					continue
				}
				for _, name := range metricNames(expr, func(vs *parser.VectorSelector) {
					if !hasMatcher(vs, "namespace", "$namespace") || !hasMatcher(vs, "job", "$job") {
						bad.add("%s: query %s: %s is not filtered by namespace=~\"$namespace\" and job=~\"$job\"", where, t.RefID, vs.String())
					}
				}) {
					used[name] = appendOnce(used[name], fmt.Sprintf("panel %q", p.Title))
				}
			}
		}
	}
	walk(d.Panels)
	if count == 0 {
		bad.add("%s: no panel", path)
	}
	return count, nil
}

func hasMatcher(vs *parser.VectorSelector, name, value string) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name == name && m.Type == labels.MatchRegexp && m.Value == value {
			return true
		}
	}
	return false
}

// metricNames: the metric name of every vector selector of expr (each
// selector given to each, when not nil).
func metricNames(expr parser.Expr, each func(*parser.VectorSelector)) []string {
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if each != nil {
			each(vs)
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names
}

func appendOnce(list []string, item string) []string {
	for _, have := range list {
		if have == item {
			return list
		}
	}
	return append(list, item)
}
