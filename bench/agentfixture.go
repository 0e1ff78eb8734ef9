package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
)

// Agent bench fixtures: a small form (a counter button and a text field)
// and a large product list (well over 2,000 accessibility nodes: headings,
// links, number fields and buttons in table rows).

const agentFormPage = `<!doctype html><title>agent fixture</title>
<style>body{font:16px sans-serif;margin:24px}button,input{font-size:16px;padding:6px 10px}</style>
<body><h1>Counter</h1>
<p><button id=inc>Increment</button> <output id=count>0</output></p>
<p><label>Note <input id=note type=text></label></p>
<script>
let n = 0;
document.getElementById('inc').addEventListener('click', () => { document.getElementById('count').textContent = String(++n); });
</script>`

// largeRows is the product count of the large page; sections of 50 rows
// each get a heading.
const largeRows = 300

func agentLargePage() string {
	var b strings.Builder
	b.WriteString(`<!doctype html><title>Catalogue — all products</title>
<style>body{font:14px sans-serif;margin:16px}td,th{padding:2px 8px;border-bottom:1px solid #ddd}</style><body>
<header><nav aria-label="Main"><ul>`)
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, `<li><a href="#cat%d">Category %d</a></li>`, i, i)
	}
	b.WriteString(`</ul></nav>
<form role=search><label>Search products <input type=search name=q></label> <button type=submit>Search</button></form></header>
<main><h1>All products</h1>`)
	colours := []string{"red", "blue", "green", "black", "white", "silver"}
	for i := 0; i < largeRows; i++ {
		if i%50 == 0 {
			if i > 0 {
				b.WriteString(`</tbody></table></section>`)
			}
			fmt.Fprintf(&b, `<section><h2 id="cat%d">Products %d–%d</h2><table><thead><tr><th>Product</th><th>SKU</th><th>Price</th><th>Quantity</th><th>Action</th></tr></thead><tbody>`, i/50+1, i+1, i+50)
		}
		fmt.Fprintf(&b, `<tr><td><a href="#p%d">Product %d — %s widget</a></td><td>SKU-%05d</td><td>$%d.%02d</td>`+
			`<td><input type=number value=1 min=0 aria-label="Quantity for product %d"></td><td><button type=button>Add to cart</button></td></tr>`,
			i, i+1, colours[i%len(colours)], 10000+i*7, 5+i%90, (i*37)%100, i+1)
	}
	b.WriteString(`</tbody></table></section></main><footer><p>© Example shop</p>`)
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&b, `<a href="#f%d">Footer link %d</a> `, i, i)
	}
	b.WriteString(`</footer>`)
	return b.String()
}

// agentFixtures serves /form and /large.
func agentFixtures() *httptest.Server {
	large := agentLargePage()
	mux := http.NewServeMux()
	serve := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, body)
		}
	}
	mux.HandleFunc("/form", serve(agentFormPage))
	mux.HandleFunc("/large", serve(large))
	return httptest.NewServer(mux)
}
