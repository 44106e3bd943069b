xquery version "3.1";
(:~
 : related.xq: the combine of a join ($i1 and $i2 are the two items).
 :
 : The seed's example: $i1 with all its fields, plus a <related-data> element holding
 : $i2's title and link.  In an outer join $i2 may be missing: $i1 is then kept as it is.
 :)
declare variable $i1 as element(item) external;
declare variable $i2 as element(item)? external;

<item>
  { $i1/@*, $i1/node() }
  { if (exists($i2)) then <related-data>{ $i2/title, $i2/link }</related-data> else () }
</item>
