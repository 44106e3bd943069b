xquery version "3.1";
(:~
 : related.xq: the combine of a join ($i1 and $i2 are the two items).
 :
 : The seed's example: $i1 with all its fields, plus $i2's title and link.  They are
 : written three ways: for readers, a "Related:" link at the end of the description;
 : for feed software, an <atom:link rel="related"> (RSS and Atom publish it); for
 : queries on the stream, a <roses:related> element (ROSES's namespace, urn:x-roses,
 : kept in the store only: feeds carry no element of a namespace readers do not know).
 : In an outer join $i2 may be missing: $i1 is then kept as it is.
 :)
declare namespace roses = "urn:x-roses";
declare namespace atom = "http://www.w3.org/2005/Atom";
declare variable $i1 as element(item) external;
declare variable $i2 as element(item)? external;

declare function local:related($other as element(item)) as xs:string {
  let $title := (normalize-space($other/title[1]), "(untitled)")[. ne ""][1]
  let $link := normalize-space($other/link[1])
  return serialize(
    <p>Related: { if ($link) then <a href="{ $link }">{ $title }</a> else $title }</p>)
};

<item>{
  $i1/@*,
  for $node in $i1/node()
  return
    if (exists($i2) and $node instance of element(description))
    then <description>{ string($node) || local:related($i2) }</description>
    else $node,
  for $other in $i2
  let $link := normalize-space($other/link[1])
  return (
    if (empty($i1/description)) then <description>{ local:related($other) }</description> else (),
    if ($link) then
      <atom:link rel="related" href="{ $link }" title="{ normalize-space($other/title[1]) }"/>
    else (),
    <roses:related>{ $other/title, $other/link }</roses:related>
  )
}</item>
