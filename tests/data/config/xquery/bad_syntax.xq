xquery version "3.1";
(: a map mutator with a syntax error on line 4 :)
<item>
  { $i/title, }
</item>
