// An element type missing from the spec's dtype table points at the type and lists the known ones.
use amso_macros::amso_array;

#[amso_array(f17, 3)]
pub struct Grid;

fn main() {}
