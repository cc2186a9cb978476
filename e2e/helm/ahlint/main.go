// ahlint checks a chart's Artifact Hub metadata as Artifact Hub reads it
// when it indexes a Helm chart (its tracker's Helm source): the chart
// loaded and validated by Helm, its version semver, and each
// `artifacthub.io/*` annotation parsed into the shape Artifact Hub gives
// it, under the same rules (change kinds, links with a name and a URL,
// image references that parse, booleans, a signing key with a URL).
// Stricter than Artifact Hub in three ways, because each is a mistake
// Artifact Hub would publish silently: an `artifacthub.io/` key it does
// not know (a typo) fails; every change must have a kind; and with
// -changelog, the changes must be the bold titles of CHANGELOG.md's
// section for the chart's version (or, before that section is named,
// of "Unreleased"), in order.
// With -images, the images annotation must name exactly those
// references, so that what a release lists is what it pushed.
//
// Artifact Hub's own linter (`ah lint`) is not built here: the Go module
// proxy this project builds from does not serve github.com/artifacthub/hub.
//
//	ahlint [-changelog CHANGELOG.md] [-images ref,ref] CHART(.tgz or directory)
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/name"
	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// The annotations Artifact Hub reads from a Helm chart.
var known = []string{
	"alternativeName", "category", "changes", "crds", "crdsExamples", "images",
	"license", "links", "maintainers", "operator", "operatorCapabilities",
	"prerelease", "recommendations", "screenshots", "containsSecurityUpdates",
	"signKey",
}

var (
	changeKinds = []string{"added", "changed", "deprecated", "removed", "fixed", "security"}
	categories  = []string{"ai-machine-learning", "database", "integration-delivery",
		"monitoring-logging", "networking", "security", "storage", "streaming-messaging",
		"skip-prediction"}
	capabilities = []string{"basic install", "seamless upgrades", "full lifecycle",
		"deep insights", "auto pilot"}
)

type link struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
}

type change struct {
	Kind        string `yaml:"kind"`
	Description string `yaml:"description"`
	Links       []link `yaml:"links"`
}

type image struct {
	Name        string   `yaml:"name"`
	Image       string   `yaml:"image"`
	Whitelisted bool     `yaml:"whitelisted"`
	Platforms   []string `yaml:"platforms"`
}

func main() {
	changelog := flag.String("changelog", "", "CHANGELOG.md whose section for the chart's version the changes must match")
	images := flag.String("images", "", "comma-separated image references the images annotation must name, exactly")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: ahlint [-changelog CHANGELOG.md] [-images ref,ref] CHART")
		os.Exit(2)
	}
	problems, err := lint(flag.Arg(0), *changelog, *images)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ahlint:", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "ahlint:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Printf("ahlint: %s: Artifact Hub metadata valid\n", flag.Arg(0))
}

func lint(path, changelog, wantImages string) ([]string, error) {
	chrt, err := loader.Load(path)
	if err != nil {
		return nil, err
	}
	if err := chrt.Validate(); err != nil {
		return nil, fmt.Errorf("invalid metadata: %w", err)
	}
	md := chrt.Metadata
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if _, err := semver.NewVersion(md.Version); err != nil {
		fail("version %q: %v", md.Version, err)
	}
	if md.Description == "" {
		fail("no description: Artifact Hub shows it in every search result")
	}
	annotations := md.Annotations
	for key := range annotations {
		short, ok := strings.CutPrefix(key, "artifacthub.io/")
		if ok && !slices.Contains(known, short) {
			fail("%s: not an annotation Artifact Hub reads (one of %s)", key, strings.Join(known, ", "))
		}
	}
	get := func(key string) (string, bool) {
		v, ok := annotations["artifacthub.io/"+key]
		return v, ok
	}

	var changes []change
	if v, ok := get("changes"); ok {
		if err := yaml.Unmarshal([]byte(v), &changes); err != nil {
			fail("artifacthub.io/changes: %v (a list of kind, description and links)", err)
		}
		for i, c := range changes {
			if !slices.Contains(changeKinds, strings.ToLower(c.Kind)) {
				fail("artifacthub.io/changes[%d]: kind %q is not one of %s", i, c.Kind, strings.Join(changeKinds, ", "))
			}
			if strings.TrimSpace(c.Description) == "" {
				fail("artifacthub.io/changes[%d]: no description", i)
			}
			for _, l := range c.Links {
				if l.Name == "" || l.URL == "" {
					fail("artifacthub.io/changes[%d]: a link needs a name and a url", i)
				}
			}
		}
	}
	if changelog != "" {
		heading, titles, err := changelogTitles(changelog, md.Version)
		if err != nil {
			return nil, err
		}
		var described []string
		for _, c := range changes {
			described = append(described, strings.TrimSpace(c.Description))
		}
		switch {
		case len(titles) > 0 && !slices.Equal(described, titles):
			fail("artifacthub.io/changes describe %q; the section of %s for %s (## %s) has the titles %q, in that order", described, changelog, md.Version, heading, titles)
		case len(titles) == 0 && len(changes) == 0:
			fail("artifacthub.io/changes: none, for version %s (## %s in %s)", md.Version, heading, changelog)
		case len(titles) == 0:
			// A section written as prose (the first release's): nothing
			// to compare one by one.
			fmt.Printf("ahlint: ## %s in %s has no bold titles: %d changes not compared\n", heading, changelog, len(changes))
		}
	}

	var listed []image
	if v, ok := get("images"); ok {
		if err := yaml.Unmarshal([]byte(v), &listed); err != nil {
			fail("artifacthub.io/images: %v (a list of name and image)", err)
		}
		for i, im := range listed {
			if im.Name == "" {
				fail("artifacthub.io/images[%d]: no name", i)
			}
			// Artifact Hub parses references with go-containerregistry.
			if _, err := name.ParseReference(im.Image); err != nil {
				fail("artifacthub.io/images[%d]: image %q: %v", i, im.Image, err)
			}
		}
	}
	if wantImages != "" {
		var refs []string
		for _, im := range listed {
			refs = append(refs, im.Image)
		}
		if want := strings.Split(wantImages, ","); !slices.Equal(refs, want) {
			fail("artifacthub.io/images names %q, not the images %q", refs, want)
		}
	}

	for _, key := range []string{"crds", "crdsExamples"} {
		if v, ok := get(key); ok {
			var list []any
			if err := yaml.Unmarshal([]byte(v), &list); err != nil {
				fail("artifacthub.io/%s: %v (a list)", key, err)
			}
		}
	}
	// The shapes Artifact Hub decodes these into: a string where it wants
	// a map fails its decoding, and the whole version with it.
	if v, ok := get("recommendations"); ok {
		var list []struct {
			URL string `yaml:"url"`
		}
		if err := yaml.Unmarshal([]byte(v), &list); err != nil {
			fail("artifacthub.io/recommendations: %v (a list of url)", err)
		}
	}
	if v, ok := get("screenshots"); ok {
		var list []struct {
			Title string `yaml:"title"`
			URL   string `yaml:"url"`
		}
		if err := yaml.Unmarshal([]byte(v), &list); err != nil {
			fail("artifacthub.io/screenshots: %v (a list of title and url)", err)
		}
	}
	for _, key := range []string{"links", "maintainers"} {
		if v, ok := get(key); ok {
			var list []map[string]string
			if err := yaml.Unmarshal([]byte(v), &list); err != nil {
				fail("artifacthub.io/%s: %v (a list of maps)", key, err)
			}
			if key == "links" {
				for i, l := range list {
					if l["name"] == "" || l["url"] == "" {
						fail("artifacthub.io/links[%d]: a link needs a name and a url", i)
					}
				}
			}
		}
	}
	for _, key := range []string{"operator", "prerelease", "containsSecurityUpdates"} {
		if v, ok := get(key); ok {
			if _, err := strconv.ParseBool(v); err != nil {
				fail("artifacthub.io/%s: %q is not a boolean", key, v)
			}
		}
	}
	if v, ok := get("category"); ok && !slices.Contains(categories, v) {
		fail("artifacthub.io/category: %q is not one of %s", v, strings.Join(categories, ", "))
	}
	if v, ok := get("operatorCapabilities"); ok && !slices.Contains(capabilities, strings.ToLower(v)) {
		fail("artifacthub.io/operatorCapabilities: %q is not one of %s", v, strings.Join(capabilities, ", "))
	}
	if v, ok := get("license"); ok && strings.TrimSpace(v) == "" {
		fail("artifacthub.io/license: empty")
	}
	if v, ok := get("signKey"); ok {
		var key struct {
			Fingerprint string `yaml:"fingerprint"`
			URL         string `yaml:"url"`
		}
		if err := yaml.Unmarshal([]byte(v), &key); err != nil {
			fail("artifacthub.io/signKey: %v", err)
		} else if key.URL == "" {
			fail("artifacthub.io/signKey: no url")
		}
	}
	return problems, nil
}

var boldTitle = regexp.MustCompile(`^- \*\*(.+?)\*\*`)

// changelogTitles returns the heading of CHANGELOG's section for version
// ("## <version>", a date may follow) or, when it has none yet, of the
// changes not yet released ("## Unreleased"), and the bold titles of that
// section's bullets, in order.
func changelogTitles(path, version string) (string, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	sections := map[string][]string{}
	headings := map[string]string{}
	var current string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\n")
		if h, ok := strings.CutPrefix(line, "## "); ok {
			fields := strings.Fields(h)
			current = ""
			if len(fields) > 0 {
				current = fields[0]
				headings[current] = h
				sections[current] = sections[current][:0:0]
			}
			continue
		}
		if m := boldTitle.FindStringSubmatch(line); current != "" && m != nil {
			sections[current] = append(sections[current], strings.TrimSpace(m[1]))
		}
	}
	for _, key := range []string{version, "Unreleased"} {
		if h, ok := headings[key]; ok {
			return h, sections[key], nil
		}
	}
	return "", nil, errors.New(path + ": no section '## " + version + "' nor '## Unreleased'")
}
