(: a good map mutator, next to the bad ones :)
<item>{ $i/*, <category>ok</category> }</item>
