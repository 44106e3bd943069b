declare variable $i external;

<item>{ $i/title }<n>{ 1 + "one" }</n></item>
