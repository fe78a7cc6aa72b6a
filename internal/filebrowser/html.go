package filebrowser

import (
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// view is a Listing as the HTML page shows it. Every link is relative to
// the page (…/files/<dir>/), so the page works under any path prefix, and
// every name is path-escaped (a name like "a:b" or "x#y" is a file, not a
// scheme or a fragment).
type view struct {
	Listing
	Rows                       []row
	Archive, Next, Prev, First string
}

type row struct {
	Entry
	Href  string // "" for a link that leaves the volume
	Human string // size, as people read it ("" for folders)
	When  string // modification time with its zone
	ISO   string // the same, RFC 3339
}

func newView(l Listing) view {
	v := view{Listing: l, Rows: make([]row, 0, len(l.Entries))}
	// /files/<dir>/ is depth(dir)+1 folders below the root of the URL space.
	depth := strings.Count(strings.Trim(l.Path, "/"), "/") + 1
	if l.Path == "/" {
		depth = 0
	}
	v.Archive = strings.Repeat("../", depth+1) + "archive" + escapePath(l.Path)
	limit := "limit=" + url.QueryEscape(itoa(l.Limit))
	if l.Continue != "" {
		v.Next = "?" + limit + "&continue=" + url.QueryEscape(l.Continue)
	}
	if l.Previous != "" {
		v.Prev = "?" + limit + "&before=" + url.QueryEscape(l.Previous)
		v.First = "?" + limit
	}
	for _, e := range l.Entries {
		r := row{Entry: e, When: e.ModTime.Format("2006-01-02 15:04:05 MST"), ISO: e.ModTime.Format(time.RFC3339)}
		switch {
		case e.Escapes:
		case e.Type == "dir":
			r.Href = "./" + url.PathEscape(e.Name) + "/"
		default:
			r.Href = "./" + url.PathEscape(e.Name)
		}
		if e.Type != "dir" {
			r.Human = humanize.IBytes(uint64(max(e.Size, 0)))
		}
		v.Rows = append(v.Rows, r)
	}
	return v
}

// escapePath path-escapes each segment of p, keeping the slashes.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func itoa(n int) string { return strconv.Itoa(n) }

var listingPage = template.Must(template.New("listing").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Path}}</title>
<meta name="viewport" content="width=device-width">
<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{padding:.2em .8em;text-align:left}
td.size{text-align:right;font-variant-numeric:tabular-nums}tr:nth-child(even){background:#f4f4f4}nav a{margin-right:1em}</style></head>
<body><h1>{{.Path}}</h1>
<p><a id="archive" href="{{.Archive}}">download this folder as .tar.gz</a></p>
<table id="entries"><thead><tr><th>name</th><th>size</th><th>mode</th><th>modified</th></tr></thead><tbody>
{{if ne .Path "/"}}<tr><td><a href="../">../</a></td><td></td><td></td><td></td></tr>{{end}}
{{range .Rows}}<tr class="entry"><td class="name">{{if .Escapes}}{{.Name}} &rarr; {{.Target}} (outside the volume){{else if eq .Type "dir"}}<a href="{{.Href}}">{{.Name}}/</a>{{else}}<a href="{{.Href}}">{{.Name}}</a>{{end}}</td><td class="size" title="{{.Size}} bytes">{{.Human}}</td><td>{{.Mode}}</td><td><time datetime="{{.ISO}}">{{.When}}</time></td></tr>
{{end}}</tbody></table>
<nav>{{if .First}}<a id="first" href="{{.First}}">first page</a><a id="prev" href="{{.Prev}}">&larr; previous page</a>{{end}}{{if .Next}}<a id="next" href="{{.Next}}">next page &rarr;</a>{{end}}</nav>
</body></html>
`))
