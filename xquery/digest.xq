xquery version "3.1";
(:~
 : digest.xq: a reducer ($items is the sequence of items of a window or a group).
 :
 : One digest item: its title counts the items, its description lists their titles
 : as links (escaped HTML, like any feed description), and its guid is derived from
 : the items' guids (or links), so the same items always give the same digest guid
 : and a different set a different one.  No items: no digest.  $key is the group's
 : key when a group-by provides one.
 :)
declare variable $items as element(item)* external;
declare variable $key as xs:string external := "";

(: a stable 32-bit hash of a string (Saxon-HE has no digest functions) :)
declare function local:hash($s as xs:string) as xs:integer {
  fold-left(string-to-codepoints($s), 5381,
    function($h, $c) { ($h * 33 + $c) mod 4294967296 })
};

declare function local:id($item as element(item)) as xs:string {
  normalize-space(($item/guid, $item/link, $item/title, "")[normalize-space(.)][1])
};

if (empty($items)) then () else
let $n := count($items)
let $ids := sort($items ! local:id(.))
let $list :=
  <ul>{
    for $item in $items
    let $title := (normalize-space($item/title[1]), "(untitled)")[. ne ""][1]
    return <li>{
      if (normalize-space($item/link[1])) then <a href="{ normalize-space($item/link[1]) }">{ $title }</a>
      else $title
    }</li>
  }</ul>
return
  <item>
    <title>{ "Digest" || (if ($key) then " of " || $key else "") || ": " || $n
             || (if ($n eq 1) then " item" else " items") }</title>
    <description>{ serialize($list) }</description>
    <guid isPermaLink="false">{ "roses-digest-" || $n || "-" || local:hash(string-join(($key, $ids), " ")) }</guid>
  </item>
