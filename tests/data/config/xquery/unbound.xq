declare variable $i external;
declare variable $threshold as xs:integer external;
<item>{ $i/title }</item>
